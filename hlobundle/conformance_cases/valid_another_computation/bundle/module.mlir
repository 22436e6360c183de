func.func @main(%a0: tensor<2xf32>) -> (tensor<2xf32>) {
  return %a0 : tensor<2xf32>
}
