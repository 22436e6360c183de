func.func @main(%a0: tensor<3xf32>, %a1: tensor<3xf32>) -> (tensor<3xf32>) {
  %y = stablehlo.multiply %a0, %a1 : tensor<3xf32>
  return %y : tensor<3xf32>
}
