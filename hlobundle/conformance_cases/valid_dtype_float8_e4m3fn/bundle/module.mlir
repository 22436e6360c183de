func.func @main(%a0: tensor<2x3xf8E4M3FN>) -> (tensor<2x3xf8E4M3FN>, tensor<3x2xf8E4M3FN>) {
  %t = stablehlo.transpose %a0, dims = [1, 0] : (tensor<2x3xf8E4M3FN>) -> tensor<3x2xf8E4M3FN>
  return %a0, %t : tensor<2x3xf8E4M3FN>, tensor<3x2xf8E4M3FN>
}
