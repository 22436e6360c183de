func.func @main(%a0: tensor<2x3xi16>) -> (tensor<2x3xi16>, tensor<3x2xi16>) {
  %t = stablehlo.transpose %a0, dims = [1, 0] : (tensor<2x3xi16>) -> tensor<3x2xi16>
  return %a0, %t : tensor<2x3xi16>, tensor<3x2xi16>
}
