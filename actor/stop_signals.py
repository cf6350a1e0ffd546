"""How an actor process takes the stop signals: SIGTERM, SIGHUP (and Ctrl-C) leave once, as on a goodbye."""
import signal

_leaving = False  # this process's actor is on its way out (leave_quietly): a stop signal then changes nothing


def leave_on_sigterm() -> None:
    """SIGTERM (a supervisor, a job's time limit, `kill`) and SIGHUP (its terminal closed) stop an actor like
    Ctrl-C does: it says goodbye to the learner, which then logs a departure instead of a peer lost
    ('unreachable'), and exits 0. A SIGHUP held blocked since launch.py started it is taken now. Ctrl-C too where
    SIGINT still has Python's own handler (an actor started by hand; launch.py's children ignore it).

    One stop per process: the first of these signals raises KeyboardInterrupt, any later one (a supervisor's
    SIGTERM as the learner's goodbye came in, a second Ctrl-C) finds the actor leaving and returns, so no
    second KeyboardInterrupt lands in the middle of the goodbye and prints a traceback."""
    global _leaving
    _leaving = False

    def interrupt(signum, _frame):
        if _leaving:
            return
        leave_quietly()
        raise KeyboardInterrupt() if signum == signal.SIGINT else KeyboardInterrupt(signal.Signals(signum).name)

    taken = [signal.SIGTERM, signal.SIGHUP]
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        taken.append(signal.SIGINT)
    for sig in taken:
        signal.signal(sig, interrupt)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGHUP})


def leave_quietly() -> None:
    """The actor leaves (a goodbye heard, a stop signal, an error): from here on the stop signals that
    leave_on_sigterm took do nothing. One assignment, so a handler runs either before it (and raises the one
    KeyboardInterrupt) or after it (and returns): replacing each signal's handler in turn left a window in
    which one of them still raised (a SIGTERM landing while SIGINT's was being replaced)."""
    global _leaving
    _leaving = True
