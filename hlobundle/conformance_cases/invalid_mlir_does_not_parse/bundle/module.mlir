func.func @main( this is not MLIR
