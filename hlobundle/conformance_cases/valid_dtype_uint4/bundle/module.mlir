func.func @main(%a0: tensor<2x3xui4>) -> (tensor<2x3xui4>, tensor<3x2xui4>) {
  %t = stablehlo.transpose %a0, dims = [1, 0] : (tensor<2x3xui4>) -> tensor<3x2xui4>
  return %a0, %t : tensor<2x3xui4>, tensor<3x2xui4>
}
