func.func @main(%a0: tensor<2x3xi2>) -> (tensor<2x3xi2>, tensor<3x2xi2>) {
  %t = stablehlo.transpose %a0, dims = [1, 0] : (tensor<2x3xi2>) -> tensor<3x2xi2>
  return %a0, %t : tensor<2x3xi2>, tensor<3x2xi2>
}
