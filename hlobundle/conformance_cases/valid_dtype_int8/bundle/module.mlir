func.func @main(%a0: tensor<2x3xi8>) -> (tensor<2x3xi8>, tensor<3x2xi8>) {
  %t = stablehlo.transpose %a0, dims = [1, 0] : (tensor<2x3xi8>) -> tensor<3x2xi8>
  return %a0, %t : tensor<2x3xi8>, tensor<3x2xi8>
}
