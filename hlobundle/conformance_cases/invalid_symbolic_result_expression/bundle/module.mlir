func.func @main(%a0: tensor<?x3xf32>, %a1: tensor<?x3xf32>) -> (tensor<?x3xf32>) {
  %z = stablehlo.add %a0, %a1 : tensor<?x3xf32>
  return %z : tensor<?x3xf32>
}
