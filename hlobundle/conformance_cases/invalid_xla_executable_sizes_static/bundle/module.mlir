func.func @main(%a0: tensor<2x2xf32>, %a1: tensor<2x2xf32>) -> (tensor<2x2xf32>) {
  %x = stablehlo.add %a0, %a1 : tensor<2x2xf32>
  return %x : tensor<2x2xf32>
}
