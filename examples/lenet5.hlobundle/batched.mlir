module @jit__lambda attributes {jax.uses_shape_polymorphism = true, mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<6xf32>, %arg1: tensor<6x1x5x5xf32>, %arg2: tensor<16xf32>, %arg3: tensor<16x6x5x5xf32>, %arg4: tensor<128xf32>, %arg5: tensor<256x128xf32>, %arg6: tensor<84xf32>, %arg7: tensor<128x84xf32>, %arg8: tensor<10xf32>, %arg9: tensor<84x10xf32>, %arg10: tensor<?x4x1x28x28xf32>) -> (tensor<?x4x10xf32> {jax.result_info = "result[0]"}) {
    %c = stablehlo.constant dense<1> : tensor<i32>
    %0 = stablehlo.get_dimension_size %arg10, dim = 0 : (tensor<?x4x1x28x28xf32>) -> tensor<i32>
    %1 = stablehlo.compare GE, %0, %c, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.custom_call @shape_assertion(%1, %0) {api_version = 2 : i32, error_message = "Input shapes do not match the polymorphic shapes specification. Expected value >= 1 for dimension variable 'b'. Using the following polymorphic shapes specifications: args[10].shape = (b, 4, 1, 28, 28). Obtained dimension variables: 'b' = {0} from specification 'b' for dimension args[10].shape[0] (= {0}), . Please see https://docs.jax.dev/en/latest/export/shape_poly.html#shape-assertion-errors for more details.", has_side_effect = true} : (tensor<i1>, tensor<i32>) -> ()
    %2 = call @_wrapped_jax_export_main(%0, %arg0, %arg1, %arg2, %arg3, %arg4, %arg5, %arg6, %arg7, %arg8, %arg9, %arg10) : (tensor<i32>, tensor<6xf32>, tensor<6x1x5x5xf32>, tensor<16xf32>, tensor<16x6x5x5xf32>, tensor<128xf32>, tensor<256x128xf32>, tensor<84xf32>, tensor<128x84xf32>, tensor<10xf32>, tensor<84x10xf32>, tensor<?x4x1x28x28xf32>) -> tensor<?x4x10xf32>
    return %2 : tensor<?x4x10xf32>
  }
  func.func private @_wrapped_jax_export_main(%arg0: tensor<i32> {jax.global_constant = "b"}, %arg1: tensor<6xf32>, %arg2: tensor<6x1x5x5xf32>, %arg3: tensor<16xf32>, %arg4: tensor<16x6x5x5xf32>, %arg5: tensor<128xf32>, %arg6: tensor<256x128xf32>, %arg7: tensor<84xf32>, %arg8: tensor<128x84xf32>, %arg9: tensor<10xf32>, %arg10: tensor<84x10xf32>, %arg11: tensor<?x4x1x28x28xf32>) -> (tensor<?x4x10xf32> {jax.result_info = "result[0]"}) {
    %c = stablehlo.constant dense<10> : tensor<1xi32>
    %c_0 = stablehlo.constant dense<84> : tensor<1xi32>
    %c_1 = stablehlo.constant dense<128> : tensor<1xi32>
    %c_2 = stablehlo.constant dense<256> : tensor<1xi32>
    %c_3 = stablehlo.constant dense<8> : tensor<1xi32>
    %c_4 = stablehlo.constant dense<16> : tensor<1xi32>
    %c_5 = stablehlo.constant dense<12> : tensor<1xi32>
    %cst = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %c_6 = stablehlo.constant dense<24> : tensor<1xi32>
    %c_7 = stablehlo.constant dense<6> : tensor<1xi32>
    %c_8 = stablehlo.constant dense<4> : tensor<1xi32>
    %c_9 = stablehlo.constant dense<28> : tensor<1xi32>
    %c_10 = stablehlo.constant dense<1> : tensor<1xi32>
    %c_11 = stablehlo.constant dense<4> : tensor<i32>
    %0 = stablehlo.convert %arg0 : tensor<i32>
    %1 = stablehlo.multiply %0, %c_11 : tensor<i32>
    %2 = stablehlo.reshape %1 : (tensor<i32>) -> tensor<1xi32>
    %3 = stablehlo.concatenate %2, %c_10, %c_9, %c_9, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<4xi32>
    %4 = stablehlo.dynamic_reshape %arg11, %3 : (tensor<?x4x1x28x28xf32>, tensor<4xi32>) -> tensor<?x1x28x28xf32>
    %5 = stablehlo.convolution(%4, %arg2) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<?x1x28x28xf32>, tensor<6x1x5x5xf32>) -> tensor<?x6x24x24xf32>
    %6 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %7 = stablehlo.concatenate %6, %c_8, %c_7, %c_6, %c_6, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<5xi32>
    %8 = stablehlo.dynamic_reshape %5, %7 : (tensor<?x6x24x24xf32>, tensor<5xi32>) -> tensor<?x4x6x24x24xf32>
    %9 = stablehlo.broadcast_in_dim %arg1, dims = [1] : (tensor<6xf32>) -> tensor<1x6x1x1xf32>
    %10 = stablehlo.broadcast_in_dim %9, dims = [1, 2, 3, 4] : (tensor<1x6x1x1xf32>) -> tensor<1x1x6x1x1xf32>
    %11 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %12 = stablehlo.concatenate %11, %c_8, %c_7, %c_6, %c_6, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<5xi32>
    %13 = stablehlo.dynamic_broadcast_in_dim %10, %12, dims = [0, 1, 2, 3, 4] : (tensor<1x1x6x1x1xf32>, tensor<5xi32>) -> tensor<?x4x6x24x24xf32>
    %14 = stablehlo.add %8, %13 : tensor<?x4x6x24x24xf32>
    %15 = call @relu(%arg0, %14) : (tensor<i32>, tensor<?x4x6x24x24xf32>) -> tensor<?x4x6x24x24xf32>
    %16 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<f32>
    %17 = "stablehlo.reduce_window"(%15, %16) <{window_dimensions = array<i64: 1, 1, 1, 2, 2>, window_strides = array<i64: 1, 1, 1, 2, 2>}> ({
    ^bb0(%arg12: tensor<f32>, %arg13: tensor<f32>):
      %62 = stablehlo.maximum %arg12, %arg13 : tensor<f32>
      stablehlo.return %62 : tensor<f32>
    }) : (tensor<?x4x6x24x24xf32>, tensor<f32>) -> tensor<?x4x6x12x12xf32>
    %18 = stablehlo.convert %arg0 : tensor<i32>
    %19 = stablehlo.multiply %18, %c_11 : tensor<i32>
    %20 = stablehlo.reshape %19 : (tensor<i32>) -> tensor<1xi32>
    %21 = stablehlo.concatenate %20, %c_7, %c_5, %c_5, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<4xi32>
    %22 = stablehlo.dynamic_reshape %17, %21 : (tensor<?x4x6x12x12xf32>, tensor<4xi32>) -> tensor<?x6x12x12xf32>
    %23 = stablehlo.convolution(%22, %arg4) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<?x6x12x12xf32>, tensor<16x6x5x5xf32>) -> tensor<?x16x8x8xf32>
    %24 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %25 = stablehlo.concatenate %24, %c_8, %c_4, %c_3, %c_3, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<5xi32>
    %26 = stablehlo.dynamic_reshape %23, %25 : (tensor<?x16x8x8xf32>, tensor<5xi32>) -> tensor<?x4x16x8x8xf32>
    %27 = stablehlo.broadcast_in_dim %arg3, dims = [1] : (tensor<16xf32>) -> tensor<1x16x1x1xf32>
    %28 = stablehlo.broadcast_in_dim %27, dims = [1, 2, 3, 4] : (tensor<1x16x1x1xf32>) -> tensor<1x1x16x1x1xf32>
    %29 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %30 = stablehlo.concatenate %29, %c_8, %c_4, %c_3, %c_3, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<5xi32>
    %31 = stablehlo.dynamic_broadcast_in_dim %28, %30, dims = [0, 1, 2, 3, 4] : (tensor<1x1x16x1x1xf32>, tensor<5xi32>) -> tensor<?x4x16x8x8xf32>
    %32 = stablehlo.add %26, %31 : tensor<?x4x16x8x8xf32>
    %33 = call @relu_0(%arg0, %32) : (tensor<i32>, tensor<?x4x16x8x8xf32>) -> tensor<?x4x16x8x8xf32>
    %34 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<f32>
    %35 = "stablehlo.reduce_window"(%33, %34) <{window_dimensions = array<i64: 1, 1, 1, 2, 2>, window_strides = array<i64: 1, 1, 1, 2, 2>}> ({
    ^bb0(%arg12: tensor<f32>, %arg13: tensor<f32>):
      %62 = stablehlo.maximum %arg12, %arg13 : tensor<f32>
      stablehlo.return %62 : tensor<f32>
    }) : (tensor<?x4x16x8x8xf32>, tensor<f32>) -> tensor<?x4x16x4x4xf32>
    %36 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %37 = stablehlo.concatenate %36, %c_8, %c_2, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %38 = stablehlo.dynamic_reshape %35, %37 : (tensor<?x4x16x4x4xf32>, tensor<3xi32>) -> tensor<?x4x256xf32>
    %39 = stablehlo.dot_general %38, %arg6, contracting_dims = [2] x [0] : (tensor<?x4x256xf32>, tensor<256x128xf32>) -> tensor<?x4x128xf32>
    %40 = stablehlo.broadcast_in_dim %arg5, dims = [1] : (tensor<128xf32>) -> tensor<1x128xf32>
    %41 = stablehlo.broadcast_in_dim %40, dims = [1, 2] : (tensor<1x128xf32>) -> tensor<1x1x128xf32>
    %42 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %43 = stablehlo.concatenate %42, %c_8, %c_1, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %44 = stablehlo.dynamic_broadcast_in_dim %41, %43, dims = [0, 1, 2] : (tensor<1x1x128xf32>, tensor<3xi32>) -> tensor<?x4x128xf32>
    %45 = stablehlo.add %39, %44 : tensor<?x4x128xf32>
    %46 = call @relu_1(%arg0, %45) : (tensor<i32>, tensor<?x4x128xf32>) -> tensor<?x4x128xf32>
    %47 = stablehlo.dot_general %46, %arg8, contracting_dims = [2] x [0] : (tensor<?x4x128xf32>, tensor<128x84xf32>) -> tensor<?x4x84xf32>
    %48 = stablehlo.broadcast_in_dim %arg7, dims = [1] : (tensor<84xf32>) -> tensor<1x84xf32>
    %49 = stablehlo.broadcast_in_dim %48, dims = [1, 2] : (tensor<1x84xf32>) -> tensor<1x1x84xf32>
    %50 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %51 = stablehlo.concatenate %50, %c_8, %c_0, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %52 = stablehlo.dynamic_broadcast_in_dim %49, %51, dims = [0, 1, 2] : (tensor<1x1x84xf32>, tensor<3xi32>) -> tensor<?x4x84xf32>
    %53 = stablehlo.add %47, %52 : tensor<?x4x84xf32>
    %54 = call @relu_2(%arg0, %53) : (tensor<i32>, tensor<?x4x84xf32>) -> tensor<?x4x84xf32>
    %55 = stablehlo.dot_general %54, %arg10, contracting_dims = [2] x [0] : (tensor<?x4x84xf32>, tensor<84x10xf32>) -> tensor<?x4x10xf32>
    %56 = stablehlo.broadcast_in_dim %arg9, dims = [1] : (tensor<10xf32>) -> tensor<1x10xf32>
    %57 = stablehlo.broadcast_in_dim %56, dims = [1, 2] : (tensor<1x10xf32>) -> tensor<1x1x10xf32>
    %58 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %59 = stablehlo.concatenate %58, %c_8, %c, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %60 = stablehlo.dynamic_broadcast_in_dim %57, %59, dims = [0, 1, 2] : (tensor<1x1x10xf32>, tensor<3xi32>) -> tensor<?x4x10xf32>
    %61 = stablehlo.add %55, %60 : tensor<?x4x10xf32>
    return %61 : tensor<?x4x10xf32>
  }
  func.func private @relu(%arg0: tensor<i32> {jax.global_constant = "b"}, %arg1: tensor<?x4x6x24x24xf32>) -> tensor<?x4x6x24x24xf32> {
    %c = stablehlo.constant dense<24> : tensor<1xi32>
    %c_0 = stablehlo.constant dense<6> : tensor<1xi32>
    %c_1 = stablehlo.constant dense<4> : tensor<1xi32>
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %0 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %1 = stablehlo.concatenate %0, %c_1, %c_0, %c, %c, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<5xi32>
    %2 = stablehlo.dynamic_broadcast_in_dim %cst, %1, dims = [] : (tensor<f32>, tensor<5xi32>) -> tensor<?x4x6x24x24xf32>
    %3 = stablehlo.maximum %arg1, %2 : tensor<?x4x6x24x24xf32>
    return %3 : tensor<?x4x6x24x24xf32>
  }
  func.func private @relu_0(%arg0: tensor<i32> {jax.global_constant = "b"}, %arg1: tensor<?x4x16x8x8xf32>) -> tensor<?x4x16x8x8xf32> {
    %c = stablehlo.constant dense<8> : tensor<1xi32>
    %c_0 = stablehlo.constant dense<16> : tensor<1xi32>
    %c_1 = stablehlo.constant dense<4> : tensor<1xi32>
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %0 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %1 = stablehlo.concatenate %0, %c_1, %c_0, %c, %c, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<5xi32>
    %2 = stablehlo.dynamic_broadcast_in_dim %cst, %1, dims = [] : (tensor<f32>, tensor<5xi32>) -> tensor<?x4x16x8x8xf32>
    %3 = stablehlo.maximum %arg1, %2 : tensor<?x4x16x8x8xf32>
    return %3 : tensor<?x4x16x8x8xf32>
  }
  func.func private @relu_1(%arg0: tensor<i32> {jax.global_constant = "b"}, %arg1: tensor<?x4x128xf32>) -> tensor<?x4x128xf32> {
    %c = stablehlo.constant dense<128> : tensor<1xi32>
    %c_0 = stablehlo.constant dense<4> : tensor<1xi32>
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %0 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %1 = stablehlo.concatenate %0, %c_0, %c, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %2 = stablehlo.dynamic_broadcast_in_dim %cst, %1, dims = [] : (tensor<f32>, tensor<3xi32>) -> tensor<?x4x128xf32>
    %3 = stablehlo.maximum %arg1, %2 : tensor<?x4x128xf32>
    return %3 : tensor<?x4x128xf32>
  }
  func.func private @relu_2(%arg0: tensor<i32> {jax.global_constant = "b"}, %arg1: tensor<?x4x84xf32>) -> tensor<?x4x84xf32> {
    %c = stablehlo.constant dense<84> : tensor<1xi32>
    %c_0 = stablehlo.constant dense<4> : tensor<1xi32>
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %0 = stablehlo.reshape %arg0 : (tensor<i32>) -> tensor<1xi32>
    %1 = stablehlo.concatenate %0, %c_0, %c, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %2 = stablehlo.dynamic_broadcast_in_dim %cst, %1, dims = [] : (tensor<f32>, tensor<3xi32>) -> tensor<?x4x84xf32>
    %3 = stablehlo.maximum %arg1, %2 : tensor<?x4x84xf32>
    return %3 : tensor<?x4x84xf32>
  }
}
