from tg.flash.cli import main

main()
