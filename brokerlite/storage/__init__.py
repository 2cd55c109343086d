"""brokerlite's storage: what lives in the data directory, and how it is kept.

A data directory's topics (:mod:`.log_manager`; names and ids :mod:`.topics`,
settings :mod:`.topic_configs`), each partition's log (:mod:`.partition`) with
its leader epochs (:mod:`.epochs`) and segments (:mod:`.segment`), compaction
(:mod:`.cleaner`), the offline checker (:mod:`.verify`), atomic file
replacement (:mod:`.files`), the CRC journal the small stores share
(:mod:`.journal`), the persistence port of the coordinators' stores
(:mod:`.state_port`: a journal file, or an internal topic, :mod:`.internal_topic`,
in a cluster), Kafka's internal topics and how they are made (:mod:`.internal_topics`),
the directory's identity
(:mod:`.node_meta`) and the conversion of pre-0.11 message sets at the edges
(:mod:`.message_format`).

Rules: nothing here imports the broker core, the handlers or a driver; what is
written is written atomically or recoverably, and opening a directory recovers
it.
"""
