# TODO: return at once when the plugin is registered already (the module's _registered).
