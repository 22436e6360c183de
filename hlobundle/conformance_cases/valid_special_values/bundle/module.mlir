func.func @main(%a0: tensor<4xf32>, %a1: tensor<4xf32>, %a2: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %q = stablehlo.divide %a0, %a1 : tensor<4xf32>
  %n = stablehlo.negate %a2 : tensor<4xf32>
  return %q, %n : tensor<4xf32>, tensor<4xf32>
}
