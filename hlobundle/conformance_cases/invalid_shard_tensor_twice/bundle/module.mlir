func.func @main(%a0: tensor<64xf32>, %a1: tensor<64xf32>, %a2: tensor<64xf32>) -> (tensor<64xf32>) {
  %s = stablehlo.add %a0, %a1 : tensor<64xf32>
  %y = stablehlo.add %s, %a2 : tensor<64xf32>
  return %y : tensor<64xf32>
}
