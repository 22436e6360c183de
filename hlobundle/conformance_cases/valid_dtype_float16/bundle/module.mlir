func.func @main(%a0: tensor<2x3xf16>) -> (tensor<2x3xf16>, tensor<3x2xf16>) {
  %t = stablehlo.transpose %a0, dims = [1, 0] : (tensor<2x3xf16>) -> tensor<3x2xf16>
  return %a0, %t : tensor<2x3xf16>, tensor<3x2xf16>
}
