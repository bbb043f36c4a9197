"""Console entry points of the serving tools: TensorFlow imported quietly first.

`serving.server` and `serving.client` import TensorFlow Serving's protos, and with
them TensorFlow, at module level; the quieting (viable_tf.logs) must come before.
"""

from __future__ import annotations

from viable_tf.logs import quiet_tensorflow


def serve() -> None:
    quiet_tensorflow()
    from serving.server import main

    main()


def client() -> None:
    quiet_tensorflow()
    from serving.client import main

    main()
