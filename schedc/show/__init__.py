"""Pictures of schedules: Gantt charts with memory curves (``plot``, matplotlib loaded on first
use) and Chrome traces for Perfetto (``trace``)."""
