"""Peers: the servers syncd is measured against, in the same run on the same core.

bare_h11 (the h11 parser's ceiling), raw_uvloop (the machine's ceiling, no
parser), starlette_app (uvicorn + Starlette doing the same increment); each
``python -m perf.peers.<name> PORT``. peers/yjs/ holds the Node side of
perf.studies.yjs: the reference Yjs servers and their load. See perf/README.md.
"""
