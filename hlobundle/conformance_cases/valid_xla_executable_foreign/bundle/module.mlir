func.func @main(%a0: tensor<3xf32>) -> (tensor<3xf32>) {
  %x = stablehlo.cosine %a0 : tensor<3xf32>
  return %x : tensor<3xf32>
}
