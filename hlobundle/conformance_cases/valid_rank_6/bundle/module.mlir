func.func @main(%a0: tensor<1x2x1x2x1x2xf32>) -> (tensor<1x2x1x2x1x2xf32>) {
  %x = stablehlo.negate %a0 : tensor<1x2x1x2x1x2xf32>
  return %x : tensor<1x2x1x2x1x2xf32>
}
