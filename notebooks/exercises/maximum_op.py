# Your rule, functor and kernel entries for stablehlo.maximum (negate's, above, show how).
add_op(rule="",
       functions="",
       kernels="")
