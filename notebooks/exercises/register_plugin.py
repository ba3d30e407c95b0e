# TODO: register the library with JAX: xla_bridge.register_plugin(PLATFORM_NAME, ...) with
# the priority, the path of the library and the client create options.
