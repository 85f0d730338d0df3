"""What users type: ``tfrun``'s entry point (:mod:`.tfrun`), its parser and
main (:mod:`.main`), and a detached job's commands (:mod:`.detach`,
:mod:`.jobs`)."""
