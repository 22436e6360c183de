func.func @main(%a0: tensor<3xf32>) -> (tensor<3xf32>, tensor<3xi32>, tensor<3xi1>) {
  %x = stablehlo.multiply %a0, %a0 : tensor<3xf32>
  %y = stablehlo.convert %a0 : (tensor<3xf32>) -> tensor<3xi32>
  %z = stablehlo.compare GT, %a0, %x : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xi1>
  return %x, %y, %z : tensor<3xf32>, tensor<3xi32>, tensor<3xi1>
}
