func.func @main(%a0: tensor<4xi64> {tf.aliasing_output = 1 : i32}) -> (tensor<4xi64>, tensor<4xi64>) {
  %c = stablehlo.constant dense<1> : tensor<4xi64>
  %x = stablehlo.add %a0, %c : tensor<4xi64>
  %s = stablehlo.multiply %x, %x : tensor<4xi64>
  return %s, %x : tensor<4xi64>, tensor<4xi64>
}
