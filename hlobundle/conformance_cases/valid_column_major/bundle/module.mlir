func.func @main(%a0: tensor<4x3x2xf32>) -> (tensor<4x3xf32>) {
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %s = stablehlo.reduce(%a0 init: %z) applies stablehlo.add across dimensions = [2] : (tensor<4x3x2xf32>, tensor<f32>) -> tensor<4x3xf32>
  return %s : tensor<4x3xf32>
}
