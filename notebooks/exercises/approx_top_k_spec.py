# TODO: the OpSpec of kernel "approx_top_k" (family "approx_top_k"): which dtypes its
# kernel computes on, which are converted to one of those, and its cost class.
