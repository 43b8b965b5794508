"""Engine replicas behind one OpenAI-compatible ingress, on Ray Serve (``loom serve --replicas N``).

``router`` (the cache-aware routing policy, no Ray), ``ingress`` (HTTP proxy over the replicas),
``metrics`` (per-replica and aggregated ``/metrics``), ``replica`` (one Loom server per replica),
``deploy`` (the Serve application; ``serve run loom.api.cluster.deploy:app_builder``), ``launch``
(the ``loom serve --replicas`` entry point).  Ray is imported only by ``deploy`` and ``launch``.
"""
