func.func @main(%a0: tensor<3xi4>) -> (tensor<3xi4>) {
  return %a0 : tensor<3xi4>
}
