func.func @main(%a0: tensor<2xf32>) -> (tensor<2xf32>) {
  %x = stablehlo.negate %a0 : tensor<2xf32>
  return %x : tensor<2xf32>
}
