func.func @main(%a0: tensor<2x2xf32>, %a1: tensor<2x2xf32>) -> (tensor<2x2xi4>) {
  %x = stablehlo.convert %a0 : (tensor<2x2xf32>) -> tensor<2x2xi4>
  return %x : tensor<2x2xi4>
}
