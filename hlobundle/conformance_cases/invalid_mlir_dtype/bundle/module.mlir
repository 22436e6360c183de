func.func @main(%a0: tensor<2x2xf32>, %a1: tensor<2x2xf32>) -> (tensor<2x2xf6E2M3FN>) {
  %x = stablehlo.convert %a0 : (tensor<2x2xf32>) -> tensor<2x2xf6E2M3FN>
  return %x : tensor<2x2xf6E2M3FN>
}
