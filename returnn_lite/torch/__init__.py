"""The PyTorch side of returnn_lite: the rf torch backend (:mod:`.frontend`) and the torch engine backend.

Nothing here is imported by the layers backend or the TF compiler: ``torch`` is an optional dependency
(``pip install -e ".[torch]"``).
"""
