# The enforcer's files of one node in one command (enforcer/verify/conftest.py, Node.files): the
# node's clock, who reads, then one line per file: its text (base64), or why this user cannot
# read it. $1: the state dir; the rest: file names in it.
#   clock <epoch seconds>
#   user <name>
#   file <name> ok <base64>  |  file <name> missing <path>  |  file <name> denied <path>
dir=$1
shift
printf 'clock %s\n' "$(date +%s)"
printf 'user %s\n' "$(id -un 2>/dev/null || id -u)"

# The first directory on the way to $1 this user cannot enter: a file behind it cannot be seen,
# which is not the same as not being there (the state dir is 0700 root).
blocked() {
    at='' rest=${1#/}
    while :; do
        case $rest in
            */*) at=$at/${rest%%/*} rest=${rest#*/} ;;
            *) return 1 ;;
        esac
        if [ -d "$at" ] && ! [ -x "$at" ]; then
            printf %s "$at"
            return 0
        fi
    done
}

for name in "$@"; do
    f=$dir/$name
    if [ -f "$f" ] && [ -r "$f" ] && text=$(base64 <"$f"); then
        printf 'file %s ok %s\n' "$name" "$(printf %s "$text" | tr -d '\n')"
    elif [ -e "$f" ]; then
        printf 'file %s denied %s\n' "$name" "$f"
    elif at=$(blocked "$f"); then
        printf 'file %s denied %s\n' "$name" "$at"
    else
        printf 'file %s missing %s\n' "$name" "$f"
    fi
done
