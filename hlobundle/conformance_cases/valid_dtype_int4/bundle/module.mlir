func.func @main(%a0: tensor<2x3xi4>) -> (tensor<2x3xi4>, tensor<3x2xi4>) {
  %t = stablehlo.transpose %a0, dims = [1, 0] : (tensor<2x3xi4>) -> tensor<3x2xi4>
  return %a0, %t : tensor<2x3xi4>, tensor<3x2xi4>
}
