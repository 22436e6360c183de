func.func @main(%a0: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<3x2xf32>) {
  %t = stablehlo.transpose %a0, dims = [1, 0] : (tensor<2x3xf32>) -> tensor<3x2xf32>
  return %a0, %t : tensor<2x3xf32>, tensor<3x2xf32>
}
