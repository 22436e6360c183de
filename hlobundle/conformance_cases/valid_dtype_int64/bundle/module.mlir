func.func @main(%a0: tensor<2x3xi64>) -> (tensor<2x3xi64>, tensor<3x2xi64>) {
  %t = stablehlo.transpose %a0, dims = [1, 0] : (tensor<2x3xi64>) -> tensor<3x2xi64>
  return %a0, %t : tensor<2x3xi64>, tensor<3x2xi64>
}
