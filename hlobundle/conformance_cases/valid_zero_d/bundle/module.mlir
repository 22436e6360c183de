func.func @main(%a0: tensor<f32>, %a1: tensor<i64>) -> (tensor<f32>, tensor<i64>) {
  %x = stablehlo.add %a0, %a0 : tensor<f32>
  %y = stablehlo.multiply %a1, %a1 : tensor<i64>
  return %x, %y : tensor<f32>, tensor<i64>
}
