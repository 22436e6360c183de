func.func @main(%a0: tensor<2x3xf4E2M1FN>) -> (tensor<2x3xf4E2M1FN>, tensor<3x2xf4E2M1FN>) {
  %t = stablehlo.transpose %a0, dims = [1, 0] : (tensor<2x3xf4E2M1FN>) -> tensor<3x2xf4E2M1FN>
  return %a0, %t : tensor<2x3xf4E2M1FN>, tensor<3x2xf4E2M1FN>
}
