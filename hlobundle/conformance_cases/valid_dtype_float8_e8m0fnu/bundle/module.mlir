func.func @main(%a0: tensor<2x3xf8E8M0FNU>) -> (tensor<2x3xf8E8M0FNU>, tensor<3x2xf8E8M0FNU>) {
  %t = stablehlo.transpose %a0, dims = [1, 0] : (tensor<2x3xf8E8M0FNU>) -> tensor<3x2xf8E8M0FNU>
  return %a0, %t : tensor<2x3xf8E8M0FNU>, tensor<3x2xf8E8M0FNU>
}
