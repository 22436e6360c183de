func.func @main(%a0: tensor<2x2xf32>, %a1: tensor<2x2xf32>) -> (tensor<2x2xf32>) {
  %t = stablehlo.create_token : !stablehlo.token
  %x, %t2 = "stablehlo.infeed"(%t) : (!stablehlo.token) -> (tensor<2x2xf32>, !stablehlo.token)
  return %x : tensor<2x2xf32>
}
