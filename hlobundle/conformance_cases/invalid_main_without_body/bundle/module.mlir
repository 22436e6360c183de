module {
  func.func private @main(%a0: tensor<2x2xf32>, %a1: tensor<2x2xf32>) -> tensor<2x2xf32>
}
