func.func @main(%a0: tensor<?x3xf32>, %a1: tensor<3xf32>) -> tensor<?x3xf32> {
  %n = stablehlo.get_dimension_size %a0, dim = 0 : (tensor<?x3xf32>) -> tensor<i32>
  %n1 = stablehlo.reshape %n : (tensor<i32>) -> tensor<1xi32>
  %c3 = stablehlo.constant dense<3> : tensor<1xi32>
  %shape = stablehlo.concatenate %n1, %c3, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
  %w = stablehlo.dynamic_broadcast_in_dim %a1, %shape, dims = [1] : (tensor<3xf32>, tensor<2xi32>) -> tensor<?x3xf32>
  %y = stablehlo.multiply %a0, %w : tensor<?x3xf32>
  return %y : tensor<?x3xf32>
}
