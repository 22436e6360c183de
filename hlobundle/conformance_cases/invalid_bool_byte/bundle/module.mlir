func.func @main(%a0: tensor<3xi1>) -> (tensor<3xi1>) {
  return %a0 : tensor<3xi1>
}
