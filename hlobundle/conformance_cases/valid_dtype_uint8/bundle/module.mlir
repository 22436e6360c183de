func.func @main(%a0: tensor<2x3xui8>) -> (tensor<2x3xui8>, tensor<3x2xui8>) {
  %t = stablehlo.transpose %a0, dims = [1, 0] : (tensor<2x3xui8>) -> tensor<3x2xui8>
  return %a0, %t : tensor<2x3xui8>, tensor<3x2xui8>
}
