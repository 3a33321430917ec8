"""The oracle: what a policy does to a frame, byte by byte, and the frames to ask it about.

``packets`` reads a frame as semantics.md "Reading a frame" says; ``interp`` is the
reference interpreter every target is judged against; ``gen`` (with ``draws``,
``genmix`` and ``framebuild``) makes test frames biased to a policy's constants;
``pcap`` reads and writes captures.
"""
