"""A layer class in its own module file, registered by a config via auto_register_layer_classes(filename)."""

from TFNetworkLayer import _ConcatInputLayer  # (the old module name; the compat layer provides it)


class ShiftLayer(_ConcatInputLayer):
    layer_class = "legacy_test_shift"

    def __init__(self, shift=1., **kwargs):
        super(ShiftLayer, self).__init__(**kwargs)
        self.output.placeholder = self.input_data.placeholder + shift

    @classmethod
    def get_out_data_from_opts(cls, name, sources, **kwargs):
        return sources[0].output.copy_template(name="%s_output" % name)
