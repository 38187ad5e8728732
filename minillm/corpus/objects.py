"""The things of the story world: for each object, the adjectives that suit it and what you can do with it.

Uses come in present and past form ("fly the kite high in the sky", "flew ..."), so that the object a
character finds is the object used later in the same story. No use contains the word "found": the gold
scorer reads "found" as the finding of the object.
"""

from __future__ import annotations

from typing import NamedTuple


class ObjectInfo(NamedTuple):
    """An object: adjectives that fit it and uses as (present, past) verb phrases."""

    adjectives: tuple[str, ...]
    uses: tuple[tuple[str, str], ...]


OBJECTS: dict[str, ObjectInfo] = {
    "ball": ObjectInfo(
        ("red", "blue", "bouncy", "big", "striped"),
        (
            ("kick the ball across the grass", "kicked the ball across the grass"),
            ("throw the ball high in the air", "threw the ball high in the air"),
        ),
    ),
    "kite": ObjectInfo(
        ("red", "colorful", "paper", "big", "striped"),
        (("fly the kite high in the sky", "flew the kite high in the sky"),),
    ),
    "key": ObjectInfo(
        ("golden", "shiny", "tiny", "old", "silver"),
        (
            ("open an old wooden box with the key", "opened an old wooden box with the key"),
            ("unlock the little garden gate with the key", "unlocked the little garden gate with the key"),
        ),
    ),
    "hat": ObjectInfo(
        ("funny", "big", "blue", "straw", "pointy"),
        (("put on the hat and dance", "put on the hat and danced"),),
    ),
    "shell": ObjectInfo(
        ("pink", "pretty", "shiny", "spotted", "white"),
        (
            ("listen to the sea inside the shell", "listened to the sea inside the shell"),
            ("put the shell on a shelf at home", "put the shell on a shelf at home"),
        ),
    ),
    "stone": ObjectInfo(
        ("smooth", "round", "shiny", "gray", "flat"),
        (
            ("skip the stone across the water", "skipped the stone across the water"),
            ("paint a smiling face on the stone", "painted a smiling face on the stone"),
        ),
    ),
    "feather": ObjectInfo(
        ("soft", "long", "blue", "white", "pretty"),
        (("tickle each other with the feather", "tickled each other with the feather"),),
    ),
    "flower": ObjectInfo(
        ("pretty", "yellow", "pink", "tiny", "purple"),
        (("put the flower in a cup of water", "put the flower in a cup of water"),),
    ),
    "stick": ObjectInfo(
        ("long", "strong", "crooked", "thin", "brown"),
        (
            ("draw pictures in the dirt with the stick", "drew pictures in the dirt with the stick"),
            ("play fetch with the stick", "played fetch with the stick"),
        ),
    ),
    "box": ObjectInfo(
        ("big", "small", "wooden", "old", "red"),
        (
            ("build a little house from the box", "built a little house from the box"),
            ("hide their toys inside the box", "hid their toys inside the box"),
        ),
    ),
    "book": ObjectInfo(
        ("old", "big", "colorful", "thick", "funny"),
        (
            ("read the book under a tree", "read the book under a tree"),
            ("look at the pictures in the book", "looked at the pictures in the book"),
        ),
    ),
    "map": ObjectInfo(
        ("old", "torn", "big", "secret", "paper"),
        (("follow the map to a hidden garden", "followed the map to a hidden garden"),),
    ),
    "coin": ObjectInfo(
        ("shiny", "gold", "silver", "old", "tiny"),
        (
            ("put the coin in a piggy bank", "put the coin in a piggy bank"),
            ("buy a sweet treat with the coin", "bought a sweet treat with the coin"),
        ),
    ),
    "ring": ObjectInfo(
        ("shiny", "gold", "silver", "tiny", "pretty"),
        (("wear the ring to a party", "wore the ring to a party"),),
    ),
    "boat": ObjectInfo(
        ("toy", "little", "wooden", "paper", "red"),
        (("sail the boat on the water", "sailed the boat on the water"),),
    ),
    "car": ObjectInfo(
        ("toy", "little", "fast", "red", "shiny"),
        (
            ("race the car down the path", "raced the car down the path"),
            ("push the car along the ground", "pushed the car along the ground"),
        ),
    ),
    "truck": ObjectInfo(
        ("toy", "yellow", "big", "little", "green"),
        (("fill the truck with sand and pebbles", "filled the truck with sand and pebbles"),),
    ),
    "doll": ObjectInfo(
        ("pretty", "old", "little", "soft", "tiny"),
        (("have a tea party with the doll", "had a tea party with the doll"),),
    ),
    "teddy": ObjectInfo(
        ("soft", "brown", "fluffy", "old", "little"),
        (
            ("hug the teddy tight", "hugged the teddy tight"),
            ("take the teddy on a picnic", "took the teddy on a picnic"),
        ),
    ),
    "blanket": ObjectInfo(
        ("warm", "soft", "striped", "big", "cozy"),
        (
            ("have a picnic on the blanket", "had a picnic on the blanket"),
            ("build a fort with the blanket", "built a fort with the blanket"),
        ),
    ),
    "cup": ObjectInfo(
        ("blue", "little", "pretty", "white", "tiny"),
        (("fill the cup with cool water", "filled the cup with cool water"),),
    ),
    "bell": ObjectInfo(
        ("little", "silver", "shiny", "golden", "tiny"),
        (("ring the bell loudly", "rang the bell loudly"),),
    ),
    "drum": ObjectInfo(
        ("little", "red", "old", "loud", "toy"),
        (("play a song on the drum", "played a song on the drum"),),
    ),
    "whistle": ObjectInfo(
        ("shiny", "silver", "little", "loud", "red"),
        (("blow the whistle to start a race", "blew the whistle to start a race"),),
    ),
    "crayon": ObjectInfo(
        ("purple", "green", "orange", "blue", "red"),
        (("draw a big sun with the crayon", "drew a big sun with the crayon"),),
    ),
    "bucket": ObjectInfo(
        ("red", "little", "blue", "plastic", "yellow"),
        (
            ("build a sand castle with the bucket", "built a sand castle with the bucket"),
            ("carry water in the bucket", "carried water in the bucket"),
        ),
    ),
    "shovel": ObjectInfo(
        ("little", "green", "plastic", "red", "old"),
        (("dig a deep hole with the shovel", "dug a deep hole with the shovel"),),
    ),
    "basket": ObjectInfo(
        ("big", "little", "straw", "old", "round"),
        (("fill the basket with berries", "filled the basket with berries"),),
    ),
    "jar": ObjectInfo(
        ("glass", "empty", "little", "old", "round"),
        (("keep pretty pebbles in the jar", "kept pretty pebbles in the jar"),),
    ),
    "lamp": ObjectInfo(
        ("little", "old", "bright", "brass", "tiny"),
        (("read a story by the light of the lamp", "read a story by the light of the lamp"),),
    ),
    "rope": ObjectInfo(
        ("long", "strong", "thick", "old", "yellow"),
        (("make a swing with the rope", "made a swing with the rope"),),
    ),
    "umbrella": ObjectInfo(
        ("big", "red", "yellow", "striped", "old"),
        (("walk in the rain under the umbrella", "walked in the rain under the umbrella"),),
    ),
    "scarf": ObjectInfo(
        ("warm", "long", "woolly", "red", "striped"),
        (("keep warm with the scarf on a cold walk", "kept warm with the scarf on a cold walk"),),
    ),
    "bike": ObjectInfo(
        ("old", "red", "little", "blue", "shiny"),
        (("ride the bike down the path", "rode the bike down the path"),),
    ),
    "wagon": ObjectInfo(
        ("red", "little", "old", "wooden", "big"),
        (("pull the wagon full of toys", "pulled the wagon full of toys"),),
    ),
    "cookie": ObjectInfo(
        ("big", "sweet", "round", "warm", "chocolate"),
        (("share the cookie", "shared the cookie"),),
    ),
    "apple": ObjectInfo(
        ("red", "green", "shiny", "big", "sweet"),
        (("share the apple", "shared the apple"),),
    ),
    "seed": ObjectInfo(
        ("tiny", "brown", "little", "round", "strange"),
        (("plant the seed in the garden", "planted the seed in the garden"),),
    ),
    "egg": ObjectInfo(
        ("blue", "small", "speckled", "white", "tiny"),
        (("bring the egg back to its nest", "brought the egg back to its nest"),),
    ),
    "balloon": ObjectInfo(
        ("red", "big", "round", "green", "shiny"),
        (("play with the balloon in the wind", "played with the balloon in the wind"),),
    ),
    "letter": ObjectInfo(
        ("old", "secret", "long", "folded", "pretty"),
        (("read the letter out loud", "read the letter out loud"),),
    ),
    "puzzle": ObjectInfo(
        ("big", "hard", "colorful", "old", "wooden"),
        (("finish the puzzle", "finished the puzzle"),),
    ),
    "robot": ObjectInfo(
        ("toy", "little", "shiny", "silver", "funny"),
        (("make the robot walk and beep", "made the robot walk and beep"),),
    ),
    "train": ObjectInfo(
        ("toy", "little", "wooden", "blue", "red"),
        (("push the train around its track", "pushed the train around its track"),),
    ),
    "button": ObjectInfo(
        ("shiny", "round", "big", "blue", "tiny"),
        (("sew the button onto an old coat", "sewed the button onto an old coat"),),
    ),
    "marble": ObjectInfo(
        ("glass", "blue", "shiny", "tiny", "green"),
        (("roll the marble down a little hill", "rolled the marble down a little hill"),),
    ),
    "flag": ObjectInfo(
        ("little", "red", "colorful", "paper", "striped"),
        (("wave the flag high", "waved the flag high"),),
    ),
    "crown": ObjectInfo(
        ("golden", "shiny", "paper", "little", "sparkly"),
        (("wear the crown and play king and queen", "wore the crown and played king and queen"),),
    ),
    "wand": ObjectInfo(
        ("magic", "sparkly", "little", "silver", "long"),
        (("wave the wand and pretend to do magic", "waved the wand and pretended to do magic"),),
    ),
    "ribbon": ObjectInfo(
        ("pink", "long", "red", "shiny", "silk"),
        (("tie the ribbon around a gift", "tied the ribbon around a gift"),),
    ),
    "camera": ObjectInfo(
        ("old", "little", "black", "toy", "shiny"),
        (("take pictures of the sky", "took pictures of the sky"),),
    ),
    "guitar": ObjectInfo(
        ("little", "old", "toy", "wooden", "red"),
        (("play a song on the guitar", "played a song on the guitar"),),
    ),
    "bottle": ObjectInfo(
        ("glass", "green", "old", "empty", "little"),
        (("put a message in the bottle", "put a message in the bottle"),),
    ),
    "pillow": ObjectInfo(
        ("soft", "fluffy", "big", "white", "round"),
        (("have a pillow fight", "had a pillow fight"),),
    ),
    "brush": ObjectInfo(
        ("little", "soft", "paint", "thin", "old"),
        (("paint a rainbow with the brush", "painted a rainbow with the brush"),),
    ),
    "mitten": ObjectInfo(
        ("warm", "woolly", "red", "little", "blue"),
        (("keep warm with the mitten in the snow", "kept warm with the mitten in the snow"),),
    ),
}
