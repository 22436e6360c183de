func.func @main(%a0: tensor<2x3xi1>) -> (tensor<2x3xi1>, tensor<3x2xi1>) {
  %t = stablehlo.transpose %a0, dims = [1, 0] : (tensor<2x3xi1>) -> tensor<3x2xi1>
  return %a0, %t : tensor<2x3xi1>, tensor<3x2xi1>
}
