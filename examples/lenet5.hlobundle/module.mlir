module @jit_flat_fn attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<6xf32>, %arg1: tensor<6x1x5x5xf32>, %arg2: tensor<16xf32>, %arg3: tensor<16x6x5x5xf32>, %arg4: tensor<128xf32>, %arg5: tensor<256x128xf32>, %arg6: tensor<84xf32>, %arg7: tensor<128x84xf32>, %arg8: tensor<10xf32>, %arg9: tensor<84x10xf32>, %arg10: tensor<4x1x28x28xf32>) -> (tensor<4x10xf32> {jax.result_info = "result"}) {
    %0 = stablehlo.convolution(%arg10, %arg1) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {stride = [1, 1], pad = [[0, 0], [0, 0]], lhs_dilate = [1, 1], rhs_dilate = [1, 1], reverse = [false, false]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64, precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>]} : (tensor<4x1x28x28xf32>, tensor<6x1x5x5xf32>) -> tensor<4x6x24x24xf32>
    %1 = stablehlo.broadcast_in_dim %arg0, dims = [1] : (tensor<6xf32>) -> tensor<1x6x1x1xf32>
    %2 = stablehlo.broadcast_in_dim %1, dims = [0, 1, 2, 3] : (tensor<1x6x1x1xf32>) -> tensor<4x6x24x24xf32>
    %3 = stablehlo.add %0, %2 : tensor<4x6x24x24xf32>
    %4 = call @relu(%3) : (tensor<4x6x24x24xf32>) -> tensor<4x6x24x24xf32>
    %cst = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %5 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<f32>
    %6 = "stablehlo.reduce_window"(%4, %5) <{base_dilations = array<i64: 1, 1, 1, 1>, padding = dense<0> : tensor<4x2xi64>, window_dilations = array<i64: 1, 1, 1, 1>, window_dimensions = array<i64: 1, 1, 2, 2>, window_strides = array<i64: 1, 1, 2, 2>}> ({
    ^bb0(%arg11: tensor<f32>, %arg12: tensor<f32>):
      %29 = stablehlo.maximum %arg11, %arg12 : tensor<f32>
      stablehlo.return %29 : tensor<f32>
    }) : (tensor<4x6x24x24xf32>, tensor<f32>) -> tensor<4x6x12x12xf32>
    %7 = stablehlo.convolution(%6, %arg3) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {stride = [1, 1], pad = [[0, 0], [0, 0]], lhs_dilate = [1, 1], rhs_dilate = [1, 1], reverse = [false, false]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64, precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>]} : (tensor<4x6x12x12xf32>, tensor<16x6x5x5xf32>) -> tensor<4x16x8x8xf32>
    %8 = stablehlo.broadcast_in_dim %arg2, dims = [1] : (tensor<16xf32>) -> tensor<1x16x1x1xf32>
    %9 = stablehlo.broadcast_in_dim %8, dims = [0, 1, 2, 3] : (tensor<1x16x1x1xf32>) -> tensor<4x16x8x8xf32>
    %10 = stablehlo.add %7, %9 : tensor<4x16x8x8xf32>
    %11 = call @relu_0(%10) : (tensor<4x16x8x8xf32>) -> tensor<4x16x8x8xf32>
    %cst_0 = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %12 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f32>) -> tensor<f32>
    %13 = "stablehlo.reduce_window"(%11, %12) <{base_dilations = array<i64: 1, 1, 1, 1>, padding = dense<0> : tensor<4x2xi64>, window_dilations = array<i64: 1, 1, 1, 1>, window_dimensions = array<i64: 1, 1, 2, 2>, window_strides = array<i64: 1, 1, 2, 2>}> ({
    ^bb0(%arg11: tensor<f32>, %arg12: tensor<f32>):
      %29 = stablehlo.maximum %arg11, %arg12 : tensor<f32>
      stablehlo.return %29 : tensor<f32>
    }) : (tensor<4x16x8x8xf32>, tensor<f32>) -> tensor<4x16x4x4xf32>
    %14 = stablehlo.reshape %13 : (tensor<4x16x4x4xf32>) -> tensor<4x256xf32>
    %15 = stablehlo.dot_general %14, %arg5, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<4x256xf32>, tensor<256x128xf32>) -> tensor<4x128xf32>
    %16 = stablehlo.broadcast_in_dim %arg4, dims = [1] : (tensor<128xf32>) -> tensor<1x128xf32>
    %17 = stablehlo.broadcast_in_dim %16, dims = [0, 1] : (tensor<1x128xf32>) -> tensor<4x128xf32>
    %18 = stablehlo.add %15, %17 : tensor<4x128xf32>
    %19 = call @relu_1(%18) : (tensor<4x128xf32>) -> tensor<4x128xf32>
    %20 = stablehlo.dot_general %19, %arg7, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<4x128xf32>, tensor<128x84xf32>) -> tensor<4x84xf32>
    %21 = stablehlo.broadcast_in_dim %arg6, dims = [1] : (tensor<84xf32>) -> tensor<1x84xf32>
    %22 = stablehlo.broadcast_in_dim %21, dims = [0, 1] : (tensor<1x84xf32>) -> tensor<4x84xf32>
    %23 = stablehlo.add %20, %22 : tensor<4x84xf32>
    %24 = call @relu_2(%23) : (tensor<4x84xf32>) -> tensor<4x84xf32>
    %25 = stablehlo.dot_general %24, %arg9, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<4x84xf32>, tensor<84x10xf32>) -> tensor<4x10xf32>
    %26 = stablehlo.broadcast_in_dim %arg8, dims = [1] : (tensor<10xf32>) -> tensor<1x10xf32>
    %27 = stablehlo.broadcast_in_dim %26, dims = [0, 1] : (tensor<1x10xf32>) -> tensor<4x10xf32>
    %28 = stablehlo.add %25, %27 : tensor<4x10xf32>
    return %28 : tensor<4x10xf32>
  }
  func.func private @relu(%arg0: tensor<4x6x24x24xf32>) -> tensor<4x6x24x24xf32> {
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %0 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<4x6x24x24xf32>
    %1 = stablehlo.maximum %arg0, %0 : tensor<4x6x24x24xf32>
    return %1 : tensor<4x6x24x24xf32>
  }
  func.func private @relu_0(%arg0: tensor<4x16x8x8xf32>) -> tensor<4x16x8x8xf32> {
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %0 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<4x16x8x8xf32>
    %1 = stablehlo.maximum %arg0, %0 : tensor<4x16x8x8xf32>
    return %1 : tensor<4x16x8x8xf32>
  }
  func.func private @relu_1(%arg0: tensor<4x128xf32>) -> tensor<4x128xf32> {
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %0 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<4x128xf32>
    %1 = stablehlo.maximum %arg0, %0 : tensor<4x128xf32>
    return %1 : tensor<4x128xf32>
  }
  func.func private @relu_2(%arg0: tensor<4x84xf32>) -> tensor<4x84xf32> {
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %0 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<4x84xf32>
    %1 = stablehlo.maximum %arg0, %0 : tensor<4x84xf32>
    return %1 : tensor<4x84xf32>
  }
}
