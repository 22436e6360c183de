func.func @main(%a0: tensor<2x3xf32>, %a1: tensor<3x2xf32>) -> (tensor<2x2xf32>) {
  %y = stablehlo.dot_general %a0, %a1, contracting_dims = [1] x [0] : (tensor<2x3xf32>, tensor<3x2xf32>) -> tensor<2x2xf32>
  return %y : tensor<2x2xf32>
}
