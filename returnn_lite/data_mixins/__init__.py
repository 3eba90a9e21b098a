"""
The frontend (``rf``) methods of the compiler's :class:`~returnn_lite.data.Dim` and :class:`~returnn_lite.data.Data`,
as mixins those classes inherit (``dim.DimFrontendMixin``, ``tensor.TensorFrontendMixin``). They sit below
:mod:`returnn_lite.data` and import neither it nor the frontend: the frontend registers itself
(``dim._frontend``), the data classes are found through the instances (``dim._data_mod``). The public names are
in :mod:`returnn_lite.tensor` (``Tensor`` is ``Data``).
"""
