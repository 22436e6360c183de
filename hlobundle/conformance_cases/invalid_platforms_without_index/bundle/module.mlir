func.func @main(%a0: tensor<3xf32>) -> (tensor<3xf32>) {
  %y = stablehlo.add %a0, %a0 : tensor<3xf32>
  return %y : tensor<3xf32>
}
