func.func @main(%a0: tensor<0x3xf32>) -> (tensor<0x3xf32>) {
  %x = stablehlo.negate %a0 : tensor<0x3xf32>
  return %x : tensor<0x3xf32>
}
