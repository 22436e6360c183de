import jax

# 64-bit dtypes are part of the format; tests lower them with x64 on.
jax.config.update("jax_enable_x64", True)
