func.func @main(%a0: tensor<i32> {jax.global_constant = "_platform_index"}, %a1: tensor<3xf32>) -> (tensor<3xf32>) {
  %y = "stablehlo.case"(%a0) ({
    %s = stablehlo.add %a1, %a1 : tensor<3xf32>
    stablehlo.return %s : tensor<3xf32>
  }, {
    %p = stablehlo.multiply %a1, %a1 : tensor<3xf32>
    stablehlo.return %p : tensor<3xf32>
  }) : (tensor<i32>) -> tensor<3xf32>
  return %y : tensor<3xf32>
}
