# The demo site shows every time with seconds and its zone, also where Django's admin formats it
# (history, filters); the apps' own columns do so in any site (weave.display.timestamp).
DATETIME_FORMAT = "Y-m-d H:i:s T"
SHORT_DATETIME_FORMAT = "Y-m-d H:i:s T"
TIME_FORMAT = "H:i:s T"
