"""The alerting sink (:mod:`sinks.alerting.sink`): check results, silent hosts and silences
(a batch's messages as rows, :mod:`.rows`, evaluated per transaction by :mod:`.evaluation`)
become alerts (:mod:`.checks`, :mod:`.hosts`, :mod:`.silences`, :mod:`.events`, their rows in
:mod:`.state`), recorded in an outbox (:mod:`.outbox`) and delivered from it
(:mod:`.deliverer`) through channels (:mod:`.channels`) chosen by the rules of
:mod:`.delivery`. Its ``alerting:`` config section is :mod:`.config`."""
